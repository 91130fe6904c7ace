"""Attacks on the trained models in a party's messages: membership and link stealing."""
