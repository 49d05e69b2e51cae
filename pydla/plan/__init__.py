"""Planning: memory (lifetimes → arena offsets) and, later, tactic selection."""
