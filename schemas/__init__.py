"""newsmon schemas."""
