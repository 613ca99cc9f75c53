"""The mpcompat command line."""
