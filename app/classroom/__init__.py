"""Live class mode: the teacher's view on every learner's screen, and questions the class answers together."""
