"""Attacks that read one party's view of a run and score what they recover against ground truth.

`attack(view, aux) -> reconstruction` sees only the adversary's messages (attacks.view) and the
declared auxiliary knowledge; the audit (attacks.audit) scores it against the runtime's private data.
"""
from attacks.audit import ATTACKS, format_findings, parse_attack, public_knowledge, run_attacks
from attacks.base import Attack, Finding, Knowledge, NoInput
from attacks.view import AdversaryView, adversary_view

__all__ = ["ATTACKS", "AdversaryView", "Attack", "Finding", "Knowledge", "NoInput", "adversary_view",
           "format_findings", "parse_attack", "public_knowledge", "run_attacks"]
