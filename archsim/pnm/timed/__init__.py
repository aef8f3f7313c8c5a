"""The timed unit: the PNM device's configuration, the workload its units replay, their address
spaces, the memory port into the DRAM model, the cycle model, its roofline bound, statistics and
timeline. Builds on the problem set-up and the functional machine.
"""
