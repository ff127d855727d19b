"""Lambda entry point; filled by the job lifecycle work."""
