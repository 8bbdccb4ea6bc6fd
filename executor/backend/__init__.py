"""The device a rank computes on: its arrays, memory, clock and collectives (host: numpy + MPI)."""
