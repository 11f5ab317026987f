// Chorus client: typed requests and events over one WebSocket, with the protocol's resume
// rules. See README.md.
export { Client } from "./client.js";
export type { ClientEvents, ClientOptions, ConnectionState, SocketFactory, SocketLike, TokenSource } from "./client.js";
export { Room } from "./room.js";
export type { EventFrame, RoomEvents, RoomState } from "./room.js";
export { Emitter, ListenerError } from "./emitter.js";
export { ChorusError, backoff, uuidv7 } from "./util.js";
export * from "./types.js";
