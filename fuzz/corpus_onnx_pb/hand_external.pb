j
locationw.binp