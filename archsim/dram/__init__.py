"""DRAM standards as data, timing tables, address mapping and the command vocabulary."""
