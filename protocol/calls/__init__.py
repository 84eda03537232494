"""The operations' arguments and answers (the Python API, batches, approvals), their
views and renderings, and the A2A mapping.
"""
