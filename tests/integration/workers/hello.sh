#!/bin/sh
# Prints one stdout and one stderr line per rank.
echo "hello stdout rank $RANK"
echo "hello stderr rank $RANK" >&2
