"""Growing a small decoder in the lab (issue 56): a training named by its spec (spec), its data (data), the model
it grows and the folders it keeps (model), the scores its heads get at every checkpoint (scores), and the training
itself in slices (trainer). Nothing here knows of HTTP, turns or budgets: app.serving.training runs it."""
