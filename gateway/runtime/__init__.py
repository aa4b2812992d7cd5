"""What one running gateway holds: its state, the routing table snapshot, reloads."""
