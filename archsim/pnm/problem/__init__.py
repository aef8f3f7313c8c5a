"""The problem set-up: decode attention as the host lays it out for the units.

The numpy reference, the `--shape` parser, the DRAM placement of queries, KV and block tables that a
kernel reads, and the partition of KV heads and context over units. Builds on the functional machine.
"""
