"""What a broker under test needs beside it.

Backing stores, the zenoh router host, and TBMQ's REST bootstrap.
"""
