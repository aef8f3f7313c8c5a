"""The controller kernel's stages, in the order a cycle runs them (see `controller.kernel`): injection, the write
drain, port arbitration (`arbiters/`), bank queues, refresh, scheduling (`schedulers/`), the row policy
(`row_policies/`), the command buses, command issue and the wake-up bounds."""
