"""Pure analysis beyond single checks: log explanation, allocator model, estimates, diff, fleet, timelines."""
