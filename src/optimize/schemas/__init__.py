"""The API's typed boundaries: pydantic models of every public route's request and answer, one module per
resource group. Answers are documented and checked, never rewritten (`optimize.schemas.common.Answer`)."""
