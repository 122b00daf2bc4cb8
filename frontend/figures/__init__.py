"""Plotly figure builders: pure functions from result JSON to a figure dict."""
