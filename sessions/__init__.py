"""Git-backed session repositories (GitPython). Never imports Textual."""
