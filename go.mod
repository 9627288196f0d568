module gmig

go 1.26
