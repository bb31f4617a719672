"""Retrieval evaluation: metrics, question sets, BEIR datasets, abstention calibration."""
