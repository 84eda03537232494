"""The vocabulary every part shares: typed errors and their codes, every bound in one
table, ids, trace context, transport addresses.
"""
