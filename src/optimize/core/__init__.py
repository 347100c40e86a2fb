"""Pure types and rules shared by every layer; imports nothing else of ours."""
