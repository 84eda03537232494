"""What crosses between processes: the envelopes, and what a parent and a node say."""
