// The same tests as rest.test.ts, with the gateway and the services calling each other in memory,
// as `npm start` runs them, instead of over HTTP/2: both wirings must behave alike.
import { setDefaultWiring } from "@ledger/e2e";
import "./rest.test.js";

setDefaultWiring("memory");
