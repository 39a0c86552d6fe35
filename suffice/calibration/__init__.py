"""Calibration on golden data: metrics, threshold choice, reports and plots."""
