"""Nexmark for the dbt-streamsql benchmark: a seeded event generator and the queries."""
