"""Datasets and vocabulary helpers."""
