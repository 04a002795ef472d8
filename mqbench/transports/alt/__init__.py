"""Alternative clients built on stock libraries (to measure what they achieve, and as oracles)."""
