"""What the kinds of work share, below every kind so that none imports another: the model a reference names and
the instructions it was trained under (`models`), the dataset version a reference picks for rows of chat
(`datasets`, `dataset_kinds`), the tool calls a model wrote into an answer (`tool_calls`), and whether vLLM can run
here (`engines`).

A helper belongs here when two kinds or more use it and it knows no kind's own tables or lifecycle; what only one
kind uses stays in that kind's package (a training method's own dataset rules stay in `training/methods/`).
"""
