"""Attacks on the clients' uploads (model updates, statistics, generators) as the server receives them."""
