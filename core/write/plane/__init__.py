"""The data planes of a write: where its records live while they are keyed, tagged and written (local or Spark)."""
