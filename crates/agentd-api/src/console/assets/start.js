"use strict";
window.Console.start();
