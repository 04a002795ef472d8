"""Wire header, 24-byte record codecs, record writers and the run manifest."""
