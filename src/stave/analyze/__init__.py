"""Analysis: pure functions from measurements to statistics, breakdowns and what-if estimates."""
