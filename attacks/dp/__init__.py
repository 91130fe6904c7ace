"""DP audits: estimators and canaries."""
