"""Data tools for the parameter-golf trainer: shard format, corpus reading, tokenizer, builders.

`data.shards` is the only module that knows the on-disk token shard format (SPEC §2).
"""
