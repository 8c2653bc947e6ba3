"""compat"""
