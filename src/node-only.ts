// import() of a Node-only module. The specifier arrives as a parameter, which no bundler folds into a
// constant, so browser builds and dev servers never try to resolve or bundle the module.

export function importNodeOnly(specifier: string): Promise<unknown> {
  return import(/* @vite-ignore */ /* webpackIgnore: true */ specifier);
}
