"""DP audits: estimators, canaries, the audit bound, and noise removal by one party or colluders."""
