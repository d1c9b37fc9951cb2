"""Helpers the tests (and bench/) share; no tests here. One home, imported as tests._support.*"""
