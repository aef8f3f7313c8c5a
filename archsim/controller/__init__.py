"""The memory controller: queues, FR-FCFS/FCFS scheduling, row policy, refresh, host/PNM ports."""
