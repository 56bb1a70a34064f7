module github.com/dthrottle/dthrottle

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/vmihailenco/msgpack/v5 v5.4.1
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
