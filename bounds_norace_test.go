//go:build !race

package attnc

const raceEnabled = false
