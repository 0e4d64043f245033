"""Shared test configuration. Area-specific fixtures live in each test package's conftest."""
