"""Talking to a being: handing it a request, following what it lived, its transcript."""
