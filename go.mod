module github.com/dthrottle/dthrottle

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/net v0.62.0 // indirect
)
