"""newsmon training_jobs."""
