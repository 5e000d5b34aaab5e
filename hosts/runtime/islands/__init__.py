"""Islands: one run across software stacks that share no collective library.

An island is the ranks of one stack (cuda, cann, bang, xla, or simulated chips on the CPU); inside it
nothing changes: one DeepSpeed world on the stack's own backend. Between islands only each island's
rank 0, its leader, talks: a torchft Manager per island, a Lighthouse per job deciding who is in the
quorum at every sync, gloo over TCP for the allreduce, and live recovery of a joining island from a
healthy one (torchft's checkpoint transport). The leader hands what crossed the bridge to its own
island's ranks with a broadcast on the island's backend.

- `layout`: where each island's samples sit in a step's global batch, and the header every sync carries;
- `tensors`: an island's full gradients and parameters whatever its ZeRO stage;
- `bridge`: the leader's torchft Manager and the in-island hand-off;
- `trainer`: the step loop of a rank in an island, in `step` or `diloco` mode.
"""
