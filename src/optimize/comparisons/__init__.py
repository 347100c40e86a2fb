"""Comparisons: models scored side by side by evaluations of one dataset and grader, the winner named and promoted."""
