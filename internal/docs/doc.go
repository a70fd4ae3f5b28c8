// Package docs holds the tests that keep the repository's markdown true: every link to a file or a heading resolves.
package docs
