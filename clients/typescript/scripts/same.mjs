// Fails when the committed generated schema differs from a fresh generation.
import { readFileSync } from "node:fs";

const [committed, fresh] = process.argv.slice(2);
if (readFileSync(committed, "utf8") !== readFileSync(fresh, "utf8")) {
  console.error(`${committed} is stale: run \`npm run generate\` in clients/typescript`);
  process.exit(1);
}
