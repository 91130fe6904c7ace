"""Attacks on the privacy protocols themselves: HE keys, SecAgg masks, CrypTen seeds, who took part."""
