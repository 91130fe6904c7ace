"""Attacks on the messages of split learning (FedGPL): embeddings, gradients and labels between the parties."""
