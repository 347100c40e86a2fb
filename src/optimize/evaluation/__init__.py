"""Evaluations: score a model's answers to a dataset's prompts with a grader."""
