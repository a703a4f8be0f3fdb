"""newsmon workers."""
