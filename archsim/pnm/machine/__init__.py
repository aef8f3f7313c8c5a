"""The functional machine: what a PNM unit does to memory, instruction by instruction.

Its state (registers, datapath configuration, SRAM scratchpad, DMA queue, a sparse DRAM image), the
executor and each opcode's semantics, the access trace every run records, and the lockstep loop that
runs several units between barriers. It knows programs, not attention problems or time.
"""
