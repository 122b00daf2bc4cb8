"""The `workbench` console script: engine commands that need no server, plus a REST client."""
